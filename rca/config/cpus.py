"""Linux CPU lists (`4-7,12`), as operators write them for `pinned_cpus`."""

from __future__ import annotations

MAX_CPU_ID = 8191  # the kernel's NR_CPUS ceiling on x86_64; anything above is a typo


def _decimal(text: str) -> bool:
    return text.isascii() and text.isdigit()


def parse_cpu_list(text: str) -> list[int]:
    """A Linux CPU list (`isolcpus`, `taskset -c`, `cpuset.cpus` syntax: `4-7,12`) as sorted ids.

    Raises ValueError saying what is wrong; the config file reports it under `pinned_cpus`.
    """
    cpus: set[int] = set()
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise ValueError("empty CPU list; write it like 4-7,12")
    for item in items:
        if not item:
            raise ValueError(f"empty item in CPU list {text!r}; write it like 4-7,12")
        low, sep, high = (part.strip() for part in item.partition("-"))
        if not _decimal(low) or (sep and not _decimal(high)):
            raise ValueError(f"{item!r} is not a CPU id or a range like 4-7")
        first, last = int(low), int(high) if sep else int(low)
        if first > last:
            raise ValueError(f"range {item!r} runs backwards")
        if last > MAX_CPU_ID:
            raise ValueError(f"CPU id {last} is above {MAX_CPU_ID}")
        cpus.update(range(first, last + 1))
    return sorted(cpus)
