"""Byte sizes as the multi-GPU peer scripts write and read them (`4K`, `16M`, `1G`).
Plain Python, no torch: plot_multi_gpu.py imports it where torch is absent."""

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def parse_size(text):
    """`4096`, `64K`, `16M`, `1G` (a trailing `B` or `iB` allowed) as a number of bytes."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    for suffix, mult in (("K", KIB), ("M", MIB), ("G", GIB)):
        if t.endswith(suffix):
            return int(t[:-1]) * mult
    return int(t)


def human(n):
    """`n` bytes in the largest unit that divides it exactly: `4K`, `1G`, or `4099`."""
    for unit, m in (("G", GIB), ("M", MIB), ("K", KIB)):
        if n >= m and n % m == 0:
            return f"{n // m}{unit}"
    return str(n)
