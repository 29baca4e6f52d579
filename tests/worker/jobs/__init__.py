"""Tests of `worker.jobs`, one file per module where it has its own."""
