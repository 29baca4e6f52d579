"""Tests of `api.services`, one file per module where it has its own."""
