"""Tests of `worker.platform`, one file per module where it has its own."""
