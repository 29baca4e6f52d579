"""Tests of `worker.webhooks`, one file per module where it has its own."""
