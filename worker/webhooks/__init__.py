"""Signed webhooks: signing (Standard Webhooks), the guarded sender, retry policy, metrics."""
