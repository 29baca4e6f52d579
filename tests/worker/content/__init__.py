"""Tests of `worker.content`, one file per module where it has its own."""
