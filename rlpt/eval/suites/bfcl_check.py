"""BFCL's AST checker: `rlpt.tasks.bfcl_check`, re-exported here (the suite's earlier home)."""
from rlpt.tasks.bfcl_check import DecodeError, check_call, check_calls, decode_calls

__all__ = ["DecodeError", "check_call", "check_calls", "decode_calls"]
