"""Fixtures of the security tests (defined in netfakes.py, which tests also import helpers from)."""

from netfakes import net, proxy, serve  # noqa: F401
