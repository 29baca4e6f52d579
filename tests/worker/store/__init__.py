"""Tests of `worker.store`, one file per module where it has its own."""
