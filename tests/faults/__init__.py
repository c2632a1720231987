"""Test doubles that misbehave on purpose: see :mod:`tests.faults.upstream`."""
