"""Tests of the archived HTTP exchange."""
