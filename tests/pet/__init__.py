"""Tests of taso.pet, one module per module of it."""
