"""Tests of `worker.domain`, one file per module where it has its own."""
