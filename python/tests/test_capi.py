"""The C API itself through ctypes (nibble._capi declares it): versions, the status and verdict
numbers of nibble_c.h, size-prefixed structs, error objects."""
import ctypes
import os

import pytest

from nibble import _capi
from nibble._capi import lib

from conftest import CPU_DIR, FIXTURES, TEST_DIR

HEADER = os.path.join(os.path.dirname(__file__), "..", "..", "core", "include", "nibble", "nibble_c.h")


def _header_enum(prefix):
    """NAME -> value of `prefix`* enumerators in nibble_c.h."""
    out = {}
    with open(HEADER) as f:
        for line in f:
            line = line.strip()
            if line.startswith(prefix) and "=" in line:
                name, value = line.split("=", 1)
                out[name.strip()] = int(value.split(",")[0].split("/")[0].strip())
    return out


def _err(e):
    try:
        return lib.nibble_host_error_status(e), _capi.text(lib.nibble_host_error_message(e))
    finally:
        lib.nibble_host_error_free(e)


def test_versions():
    assert lib.nibble_host_api_version() == _capi.API_VERSION == 1
    assert _capi.text(lib.nibble_host_version()).count(".") == 2


def test_status_names_and_numbers_follow_the_header():
    statuses = _header_enum("NIBBLE_HOST_ERR_")
    assert len(statuses) == 13 and sorted(statuses.values()) == list(range(1, 14))
    names = {lib.nibble_host_status_name(v) for v in statuses.values()}
    assert len(names) == 13, "every status has its own name"
    assert lib.nibble_host_status_name(0) == b"ok"
    assert lib.nibble_host_status_name(99) == b"unknown status"
    assert statuses["NIBBLE_HOST_ERR_NO_BACKEND"] == _capi.ERR_NO_BACKEND
    # The Python exception classes carry the same numbers.
    from nibble._errors import BY_CODE
    assert sorted(BY_CODE) == sorted(statuses.values())


def test_a_null_error_is_success():
    assert lib.nibble_host_error_status(None) == 0
    assert lib.nibble_host_error_message(None) == b""
    lib.nibble_host_error_free(None)


def test_structs_are_size_prefixed():
    dirs = (ctypes.c_char_p * 2)(CPU_DIR.encode(), TEST_DIR.encode())
    reg = ctypes.c_void_p()
    assert not lib.nibble_host_registry_discover(_capi.Discovery(dirs=dirs, num_dirs=2, use_default_dirs=0, use_env=0), reg)
    try:
        info = _capi.BackendInfo()
        assert not lib.nibble_host_registry_backend(reg, 0, info)
        assert info.struct_size == ctypes.sizeof(_capi.BackendInfo)
        short = _capi.BackendInfo()
        short.struct_size = 16
        status, msg = _err(lib.nibble_host_registry_backend(reg, 0, short))
        assert status == 1 and "'info'->struct_size is 16, expected at least" in msg
        # Discovery options smaller than the first release are refused too.
        bad = _capi.Discovery()
        bad.struct_size = 4
        other = ctypes.c_void_p()
        status, msg = _err(lib.nibble_host_registry_discover(bad, other))
        assert status == 1 and "'options'->struct_size is 4" in msg and not other.value
        # NULL arguments name themselves.
        status, msg = _err(lib.nibble_host_registry_backend(None, 0, info))
        assert status == 1 and msg == "nibble_host_registry_backend: 'registry' is NULL"
    finally:
        lib.nibble_host_registry_free(reg)


def test_verdict_numbers_follow_the_header():
    verdicts = _header_enum("NIBBLE_HOST_VERDICT_")
    dirs = (ctypes.c_char_p * 1)(TEST_DIR.encode())
    reg, ck, sel = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    assert not lib.nibble_host_registry_discover(_capi.Discovery(dirs=dirs, num_dirs=1), reg)
    assert not lib.nibble_host_checkpoint_open(os.path.join(FIXTURES, "gptq_v1_sym_g128").encode(), ck)
    try:
        assert not lib.nibble_host_select(reg, ck, b"model.layers.0.mlp.down_proj", None, sel)
        seen = {}
        for i in range(lib.nibble_host_selection_num_candidates(sel)):
            c = _capi.CandidateInfo()
            assert not lib.nibble_host_selection_candidate(sel, i, c)
            seen[c.verdict_name.decode()] = c.verdict
        lib.nibble_host_selection_free(sel)
        for name, value in seen.items():
            assert verdicts["NIBBLE_HOST_VERDICT_" + name.upper().replace(" ", "_")] == value
        assert {"selected", "viable", "no device", "cannot implement", "load failed"} <= set(seen)
    finally:
        lib.nibble_host_checkpoint_free(ck)
        lib.nibble_host_registry_free(reg)
