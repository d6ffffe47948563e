"""Helpers shared by test layers."""
