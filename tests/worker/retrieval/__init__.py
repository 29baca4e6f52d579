"""Tests of `worker.retrieval`, one file per module where it has its own."""
