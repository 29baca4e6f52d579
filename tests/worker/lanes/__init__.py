"""Tests of `worker.lanes`, one file per module where it has its own."""
