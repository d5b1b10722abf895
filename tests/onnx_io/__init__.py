"""Tests of taso.onnx, one module per module of it (the folder is not named onnx: as a test package it would
shadow the onnx library)."""
