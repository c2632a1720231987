"""Tests of one dialect each (``test_<module>.py``, which may name their own dialect), and the
fixture dialect the test suite registers (:mod:`dialects.fixture_dialect`)."""
