"""Tests of taso.ir, one module per module of it."""
