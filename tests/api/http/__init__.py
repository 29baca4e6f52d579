"""Tests of `api.http`, one file per module where it has its own."""
