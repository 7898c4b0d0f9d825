# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.
"""Pinned, vectorised hashes of node UUIDs and host names.

Every value here is specified bit for bit (never Python's salted ``hash()``)
so that all services, whatever their Python or platform, compute the same.
"""

from __future__ import annotations

from collections.abc import Sequence
import hashlib

import numpy as np
import numpy.typing as npt

U64 = npt.NDArray[np.uint64]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)

_CHUNK = 1 << 16


def mix64(x: U64) -> U64:
    """SplitMix64's finaliser: a bijective, well-spread 64-bit mix."""
    with np.errstate(over='ignore'):
        x = x ^ (x >> _S30)
        x = x * _M1
        x = x ^ (x >> _S27)
        x = x * _M2
        return x ^ (x >> _S31)


def blake64(text: str) -> int:
    """BLAKE2b with an 8-byte digest, big-endian: any string to 64 bits."""
    return int.from_bytes(
        hashlib.blake2b(text.encode('utf-8'), digest_size=8).digest(), 'big')


def spread(seeds: Sequence[int], count: int) -> U64:
    """``count`` pseudo-random 64-bit points per seed, seed after seed.

    Point ``i`` (from 1) of seed ``s`` is ``mix64(s + i * 0x9E3779B97F4A7C15)``
    modulo 2^64.
    """
    base = np.asarray(seeds, dtype=np.uint64).reshape(-1, 1)
    steps = np.arange(1, count + 1, dtype=np.uint64).reshape(1, -1)
    with np.errstate(over='ignore'):
        offsets: U64 = np.multiply(steps, _GOLDEN, dtype=np.uint64)
        summed: U64 = np.add(base, offsets, dtype=np.uint64)
    return mix64(summed.ravel())


def node_keys(node_uuids: Sequence[str]) -> tuple[U64, U64]:
    """Two independent 64-bit keys per node UUID, vectorised.

    A UUID in its 36-character form (32 hex digits, any case, and four
    dashes) whose digits read as 128 bits ``hi:lo`` is keyed
    ``mix64(hi ^ mix64(lo))`` and, as a tie-breaker, ``mix64(lo ^
    mix64(hi))``: together they are a bijection of the 128 bits, so two
    different UUIDs never tie. Any other string is keyed by the two halves
    of the 16-byte BLAKE2b of its UTF-8 form.
    """
    first = np.empty(len(node_uuids), dtype=np.uint64)
    second = np.empty(len(node_uuids), dtype=np.uint64)
    for start in range(0, len(node_uuids), _CHUNK):
        chunk = node_uuids[start:start + _CHUNK]
        end = start + len(chunk)
        first[start:end], second[start:end] = _chunk_keys(chunk)
    return first, second


def _chunk_keys(chunk: Sequence[str]) -> tuple[U64, U64]:
    n = len(chunk)
    joined = ''.join(chunk)
    halves = None
    # Ironic only stores canonical UUIDs; this cheap check (dashes where
    # the 8-4-4-4-12 form has them, nowhere else) lets a whole chunk be
    # decoded at once by bytes.fromhex.
    dashes = '-' * n
    if (len(joined) == 36 * n and joined.count('-') == 4 * n and
            all(joined[c::36] == dashes for c in (8, 13, 18, 23))):
        try:
            raw = bytes.fromhex(joined.replace('-', ''))
        except ValueError:
            pass
        else:
            # (fromhex skips whitespace: a blank where a digit belongs
            # leaves fewer bytes.)
            if len(raw) == 16 * n:
                halves = np.frombuffer(raw, dtype='>u8').reshape(n, 2)
    if halves is None:
        if n > 1:
            # Not all canonical: key each one on its own.
            pairs = [_chunk_keys([u]) for u in chunk]
            return (np.concatenate([p[0] for p in pairs]),
                    np.concatenate([p[1] for p in pairs]))
        digest = hashlib.blake2b(joined.encode('utf-8'),
                                 digest_size=16).digest()
        words = np.frombuffer(digest, dtype='>u8').astype(np.uint64)
        return words[:1], words[1:]
    hi = halves[:, 0].astype(np.uint64)
    lo = halves[:, 1].astype(np.uint64)
    return mix64(hi ^ mix64(lo)), mix64(lo ^ mix64(hi))


def md5_int(data: bytes) -> int:
    """The position tooz's hash ring gives ``data``: md5 as an integer."""
    return int.from_bytes(hashlib.md5(data, usedforsecurity=False).digest(),
                          'big')


def md5_halves(node_uuids: Sequence[str]) -> tuple[U64, U64]:
    """md5 of each UUID's UTF-8 bytes, as (high, low) 64-bit halves."""
    md5 = hashlib.md5
    digests = b''.join([md5(u.encode('utf-8'), usedforsecurity=False).digest()
                        for u in node_uuids])
    halves = np.frombuffer(digests, dtype='>u8').reshape(-1, 2)
    return (halves[:, 0].astype(np.uint64), halves[:, 1].astype(np.uint64))
