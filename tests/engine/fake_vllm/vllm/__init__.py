"""Fake vLLM for lifecycle tests."""
