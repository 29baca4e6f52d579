"""Tests of `api.serving`, one file per module where it has its own."""
