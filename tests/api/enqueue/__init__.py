"""Tests of `api.enqueue`, one file per module where it has its own."""
