#!/usr/bin/env python3
"""Writes the seed corpora in fuzz/corpus/<target>/ from the unit-test fixtures.

    python3 fuzz/make-corpus.py        (from the repository root)

The seeds are the fixtures the unit tests already spell out, so the fuzzer
starts from inputs that reach deep into each parser:

- pdu:       the annotated hex PDUs in crates/rlun-iscsi/src/proto/pdu.rs (`hex("...")`);
- scsi:      the byte-array fixtures in crates/rlun-iscsi/src/scsi/*.rs (INQUIRY, VPD, READ
             CAPACITY, REPORT LUNS, MODE SENSE, sense data);
- text:      the byte-string segments in crates/rlun-iscsi/src/proto/text.rs;
- negotiate: every `kv(&[...])` key list in crates/rlun-iscsi/src/proto/negotiate.rs and
             crates/rlun-iscsi/src/proto/chap.rs, as one response each;
- login:     each login unit test's sequence of `rsp(...)` responses in
             crates/rlun-iscsi/src/proto/login.rs;
- session:   the target PDUs of crates/rlun-iscsi/src/proto/pdu.rs aimed at commands the seed
             submits first (read, write, text, ping, abort), following the
             exchanges the session unit tests run;
- url:       every iscsi:// / iser:// literal in src/url.rs and src/config.rs;
- config:    the TOML texts in src/config.rs tests and packaging/rlun.toml.

The input formats are described at the top of each fuzz/fuzz_targets/*.rs.
File names are the SHA-1 of the content (as libFuzzer names its own), so
running the script again changes nothing unless the fixtures changed.
"""

import ast
import hashlib
import os
import re
import struct
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(ROOT, "fuzz", "corpus")


def src(path):
    """The text of a source file, or of a module split into a directory:
    `x.rs` that became `x/*.rs` reads as all of those, in name order."""
    full = os.path.join(ROOT, path)
    if not os.path.exists(full) and full.endswith(".rs") and os.path.isdir(full[:-3]):
        parts = []
        for dirpath, _, names in sorted(os.walk(full[:-3])):
            for name in sorted(names):
                if name.endswith(".rs"):
                    parts.append(src(os.path.relpath(os.path.join(dirpath, name), ROOT)))
        return "\n".join(parts)
    with open(full, encoding="utf-8") as f:
        return f.read()


def strip_comments(text):
    return "\n".join(line.split("//")[0] for line in text.splitlines())


def write(target, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def matching_bracket(text, start):
    """Index just past the bracket that closes the one at text[start]."""
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c in "[(":
            depth += 1
        elif c in "])":
            depth -= 1
            if depth == 0:
                return i + 1
    raise ValueError("unbalanced brackets")


def hex_fixtures(text):
    """The byte strings given to the tests' `hex("...")` helper."""
    out = []
    for m in re.finditer(r'\bhex\(\s*"((?:[^"\\]|\\.)*)"', text, re.S):
        body = strip_comments(m.group(1))
        digits = "".join(body.split())
        if digits and re.fullmatch(r"([0-9a-fA-F]{2})+", digits):
            out.append(bytes.fromhex(digits))
    return out


def array_fixtures(text):
    """`const X: [u8; N] = [...]`, `let buf = [...]` and `vec![...]` literals."""
    out = []
    pat = re.compile(
        r"(?:const \w+: \[u8; \d+\]|let (?:mut )?\w+(?:: \[u8; \d+\])?)\s*=\s*(?:vec!)?\["
    )
    for m in pat.finditer(text):
        start = m.end() - 1
        end = matching_bracket(text, start)
        body = strip_comments(text[start + 1 : end - 1])
        if ";" in body:
            continue  # `[0u8; N]` repeat syntax
        data = bytearray()
        ok = True
        for tok in [t.strip() for t in body.split(",") if t.strip()]:
            tok = re.sub(r"u8$", "", tok)
            if re.fullmatch(r"b'.'", tok):
                data.append(ord(tok[2]))
            elif re.fullmatch(r"0[xX][0-9a-fA-F]+", tok):
                data.append(int(tok, 16) & 0xFF)
            elif re.fullmatch(r"\d+", tok):
                data.append(int(tok) & 0xFF)
            else:
                ok = False
                break
        if ok and data:
            out.append(bytes(data))
    return out


def byte_strings(text):
    out = []
    for m in re.finditer(r'\bb"((?:[^"\\]|\\.)*)"', text):
        try:
            out.append(ast.literal_eval('b"' + m.group(1) + '"'))
        except (ValueError, SyntaxError):
            pass
    return out


def str_pairs(text):
    return [
        (ast.literal_eval('"' + k + '"'), ast.literal_eval('"' + v + '"'))
        for k, v in re.findall(r'\(\s*"((?:[^"\\]|\\.)*)"\s*,\s*"((?:[^"\\]|\\.)*)"\s*\)', text)
    ]


def kv_lists(text):
    out = []
    for m in re.finditer(r"\bkv\(&\[", text):
        start = m.end() - 1
        end = matching_bracket(text, start)
        pairs = str_pairs(text[start:end])
        if pairs:
            out.append(pairs)
    return out


def encode_text(pairs):
    return b"".join(k.encode() + b"=" + v.encode() + b"\0" for k, v in pairs)


def u16(n):
    return struct.pack(">H", n)


def u32(n):
    return struct.pack(">I", n & 0xFFFFFFFF)


# ---- pdu ---------------------------------------------------------------

PDUS = hex_fixtures(src("crates/rlun-iscsi/src/proto/pdu.rs"))


def pdu_seeds():
    for wire in PDUS:
        write("pdu", b"\x00" + wire)  # raw stream, no digests
    # Shaped mode: every fixture's header with its data, header+data digests.
    shaped = b"".join(w[:48] + u16(len(w) - 48) + w[48:] for w in PDUS if len(w) >= 48)
    write("pdu", b"\x07" + shaped)


# ---- scsi --------------------------------------------------------------


def scsi_seeds():
    for name in sorted(os.listdir(os.path.join(ROOT, "crates", "rlun-iscsi", "src", "scsi"))):
        for data in array_fixtures(src("crates/rlun-iscsi/src/scsi/" + name)):
            write("scsi", b"\xf0" + data)  # shape 0xf0: the bytes as they are


# ---- text and negotiate -------------------------------------------------


def text_seeds():
    for data in byte_strings(src("crates/rlun-iscsi/src/proto/text.rs")):
        if b"=" in data:
            write("text", b"\x00" + data)
            if len(data) > 4:
                # The same segment cut into three continued PDUs.
                write("text", b"\x02" + u16(len(data) // 3) + u16(2 * len(data) // 3) + data)


def negotiate_seeds():
    lists = kv_lists(src("crates/rlun-iscsi/src/proto/negotiate.rs")) + kv_lists(src("crates/rlun-iscsi/src/proto/chap.rs"))
    for pairs in lists:
        seg = encode_text(pairs)
        for cfg in (0x00, 0x80):  # normal and discovery session
            write("negotiate", bytes([cfg, 0]) + u16(len(seg)) + seg)


# ---- login -------------------------------------------------------------

STAGE = {"Security": 0, "Operational": 1, "FullFeature": 3}


def login_response(transit, csg, nsg, stat_sn, pairs):
    flags = (1 if transit else 0) | (STAGE[csg] << 4) | (STAGE[nsg] << 6)
    seg = encode_text(pairs)
    return (
        bytes([flags])
        + u16(7 if nsg == "FullFeature" else 0)  # TSIH
        + u32(stat_sn)
        + u32(1)  # ExpCmdSN
        + u32(32)  # MaxCmdSN
        + u16(len(seg))
        + seg
    )


def login_seeds():
    text = src("crates/rlun-iscsi/src/proto/login.rs")
    tests = re.split(r"\n    #\[test\]\n", text)
    rsp = re.compile(r"\brsp\(\s*(true|false),\s*Stage::(\w+),\s*Stage::(\w+),\s*(\d+),\s*&")
    for body in tests[1:]:
        cfg = 0x01 if "cfg(Some(" in body else 0x00
        responses = []
        for m in rsp.finditer(body):
            start = m.end()
            if body[start] != "[":
                continue  # keys computed at run time (`&refs`)
            end = matching_bracket(body, start)
            responses.append(
                login_response(m.group(1) == "true", m.group(2), m.group(3), int(m.group(4)), str_pairs(body[start:end]))
            )
        if responses:
            write("login", bytes([cfg]) + b"".join(responses))
    # The tgtd exchange the negotiator tests use, as a whole no-auth login.
    tgtd = next(p for p in kv_lists(src("crates/rlun-iscsi/src/proto/negotiate.rs")) if ("MaxBurstLength", "262144") in p)
    write(
        "login",
        b"\x00"
        + login_response(True, "Security", "Operational", 0, [("AuthMethod", "None"), ("TargetPortalGroupTag", "1")])
        + login_response(True, "Operational", "FullFeature", 1, tgtd[1:]),
    )


# ---- session -----------------------------------------------------------

# Operation bytes of the session target (see fuzz_targets/session.rs).
TAG = 0x10  # aim the PDU at a task we sent
SEQ = 0x20  # Data-In: DataSN/offset in sequence; R2T: a range of the write
WIN = 0x40  # open the command window
STAT = 0x80  # StatSN = ExpStatSN
OPCODE_INDEX = {0x20: 0, 0x21: 1, 0x22: 3, 0x24: 4, 0x25: 5, 0x26: 8, 0x31: 9, 0x32: 11, 0x3F: 12, 0x23: 13}


def session_pdu(wire, tag=0, fix=TAG | SEQ | WIN | STAT):
    """A target PDU as a session-target operation, aimed at task tag `tag`."""
    idx = OPCODE_INDEX.get(wire[0] & 0x3F, 14)
    dlen = (wire[5] << 16) | (wire[6] << 8) | wire[7]
    data = wire[48 : 48 + dlen]
    head = bytearray(wire[:48])
    head[16] = tag  # index into the tags the seed's requests produced
    return bytes([fix | idx]) + bytes(head) + u16(len(data)) + data


def pdu(opcode, flags=0x80, ttt=0xFFFFFFFF, data=b"", byte2=0):
    """A target PDU with the fields the seeds need; the rest are set by the
    target's fix-ups (task tag, sequence numbers, offsets)."""
    b = bytearray(48)
    b[0], b[1], b[2] = opcode, flags, byte2
    b[5:8] = struct.pack(">I", len(data))[1:]
    b[20:24] = u32(ttt)
    return bytes(b) + data


def session_seeds():
    cfg = bytes([0x11, 3]) + u32(1) + bytes([7]) + u32(1)  # 8 KiB segments, QD 4, window 8
    read = b"\x00" + u16(256) + b"\x00"  # READ of 4096 bytes on LUN 0
    write_ = b"\x08" + u16(2048) + b"\x00\x00"  # WRITE of 16 KiB on LUN 0
    text = b"\x10\x11SendTargets=All\x00"
    ping = b"\x14"
    # Target PDUs from the pdu.rs fixtures, aimed at the seed's first task.
    for wire in PDUS:
        if len(wire) >= 48 and 0x20 <= (wire[0] & 0x3F) <= 0x3F:
            for first in (read, write_, text, ping):
                write("session", cfg + first + session_pdu(wire))
    # A read answered by two in-order Data-In PDUs, the last with status.
    write("session", cfg + read + session_pdu(pdu(0x25, 0x00, data=b"A" * 2048)) + session_pdu(pdu(0x25, 0x81, data=b"B" * 2048)))
    # A write answered by an R2T for part of it, then a SCSI Response.
    write("session", cfg + write_ + session_pdu(pdu(0x31)) + session_pdu(pdu(0x21)))
    # A text answer in two parts (continue), then the end.
    write("session", cfg + text + session_pdu(pdu(0x24, 0x40, ttt=5, data=b"TargetName=iqn.x\0")) + session_pdu(pdu(0x24, 0x80)))
    # Abort of an in-flight read (task 0), answered "function complete" (tag 1).
    write("session", cfg + read + b"\x18\x00" + session_pdu(pdu(0x22, 0x80), tag=1) + session_pdu(pdu(0x21)))
    # A ping answered, then keepalive timeouts with nothing heard.
    write("session", cfg + ping + session_pdu(pdu(0x20, 0x80)) + b"\x24" + u16(5000) + b"\x24" + u16(5000))
    # A Reject naming the read (its header in the data segment).
    write("session", cfg + read + session_pdu(pdu(0x3F, 0x80, byte2=0x09, data=bytes(19) + b"\x01" + bytes(28))))


# ---- url and config ----------------------------------------------------


def url_seeds():
    for path in ("src/url.rs", "src/config.rs", "src/cli.rs", "README.md"):
        for m in re.finditer(r'"((?:iscsi|iser)://[^"\s]*)"', src(path)):
            write("url", m.group(1).encode())
        for m in re.finditer(r"\b((?:iscsi|iser)://[^\s`'\"<>)]+)", src(path)):
            write("url", m.group(1).encode())


def config_seeds():
    text = src("src/config.rs")
    for m in re.finditer(r'r#"(.*?)"#', text, re.S):
        body = m.group(1)
        if "[" in body and "=" in body:
            write("config", body.encode())
    write("config", src("packaging/rlun.toml").encode())
    for value in ("4k", "1MiB", "10s", "500ms", "0640", "prefer-crc32c"):
        write("config", value.encode())


def main():
    for seeds in (pdu_seeds, scsi_seeds, text_seeds, negotiate_seeds, login_seeds, session_seeds, url_seeds, config_seeds):
        seeds()
    total = 0
    for target in sorted(os.listdir(OUT)):
        files = os.listdir(os.path.join(OUT, target))
        size = sum(os.path.getsize(os.path.join(OUT, target, f)) for f in files)
        total += size
        print(f"{target:10} {len(files):4} seeds {size:8} bytes")
    print(f"{'total':10} {total:19} bytes")
    if total > 1 << 20:
        print("make-corpus: the committed corpus must stay under 1 MiB", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
