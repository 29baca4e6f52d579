"""Tests of `worker.fetch`, one file per module where it has its own."""
