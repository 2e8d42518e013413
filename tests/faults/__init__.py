"""Fault-injection tests (issue 29): each fault ends in one line, the right exit code and
nothing lost."""
