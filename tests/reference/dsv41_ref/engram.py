"""Engram n-gram hashing of DeepSeek V4.1 (v41.md §3.9.2-§3.9.4).

Owns: the bucket-prime search and per-layer offsets (recomputed and checked against the file),
and the per-position hash ids from the compressed-id history (sticky blocking, one rolling value
per n-gram size shared by the heads). The table lookup and the gate are in model.py.
Integers are Python ints: every product is below 2^63 by construction (§3.9.3).
"""

DEAD = -1  # history marker of an image-span token (never produced by the text-only path)


def _is_prime(v):
    if v < 2:
        return False
    if v % 2 == 0:
        return v == 2
    f = 3
    while f * f <= v:
        if v % f == 0:
            return False
        f += 2
    return True


def bucket_primes(n_layers, vocab_size, max_ngram, n_heads):
    """primes[l][n-2][h] (§3.9.2): for every Engram layer and n-gram size the search restarts
    at vocab_size - 1 and takes the next primes not used so far (by any layer)."""
    seen = set()
    out = []
    for _ in range(n_layers):
        layer = []
        for _n in range(2, max_ngram + 1):
            cur = vocab_size - 1
            row = []
            for _h in range(n_heads):
                cur += 1
                while not _is_prime(cur) or cur in seen:
                    cur += 1
                seen.add(cur)
                row.append(cur)
            layer.append(row)
        out.append(layer)
    return out


def offsets_of(primes_layer):
    """Flat per-layer offsets over columns c = (n-2)*EH + h: the prefix sums of the primes."""
    flat = [p for row in primes_layer for p in row]
    offs, run = [], 0
    for p in flat:
        offs.append(run)
        run += p
    return offs


def hash_ids(hist, p, mult, primes_layer, offsets, pad_id):
    """The C = (N-1)*EH row indices of the token at position p for one Engram layer (§3.9.4).

    hist: compressed ids by absolute position (DEAD for image tokens); mult: [N] multipliers;
    primes_layer: [N-1][EH]; offsets: [C]; pad_id: the compressed pad id."""
    n_max = len(mult)
    eh = len(primes_layer[0])
    out = [0] * ((n_max - 1) * eh)
    blocked = False
    rolling = 0
    for s in range(n_max):
        blocked = blocked or (p - s < 0) or hist[p - s] == DEAD
        v = pad_id if blocked else hist[p - s]
        rolling = v * mult[0] if s == 0 else rolling ^ (v * mult[s])
        if s >= 1:
            for h in range(eh):
                c = (s - 1) * eh + h
                out[c] = rolling % primes_layer[s - 1][h] + offsets[c]
    return out
