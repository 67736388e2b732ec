"""JSON-like message values for the compression figures (issue 30): an event a service would
log, with the field names every record repeats and the ids, times and amounts that vary."""

from __future__ import annotations

import json
import random

EVENTS = ("page_view", "add_to_cart", "checkout", "search", "login", "logout")
COUNTRIES = ("US", "FR", "DE", "JP", "BR", "IN", "GB", "CA")
DEVICES = ("mobile", "desktop", "tablet")


def json_value(rng: random.Random, n: int, size: int) -> bytes:
    """One event as compact JSON of exactly `size` bytes (a `note` of lower-case words pads it)."""
    event = {"event_id": f"{rng.getrandbits(128):032x}", "user_id": rng.randrange(1, 10**6),
             "type": rng.choice(EVENTS), "ts": 1_732_780_000_000 + n * 7 + rng.randrange(7),
             "page": f"/products/{rng.randrange(10**4)}", "country": rng.choice(COUNTRIES),
             "device": rng.choice(DEVICES), "amount": round(rng.uniform(0, 500), 2),
             "note": ""}
    text = json.dumps(event, separators=(",", ":"))
    words = []
    while len(text) + len(" ".join(words)) < size:
        words.append(rng.choice(("ok", "new", "promo", "cart", "retry", "fast", "eu", "beta")))
    note = " ".join(words)[: size - len(text)]
    value = text.replace('"note":""', f'"note":"{note}"').encode()
    if len(value) != size:
        raise ValueError(f"a {size} B value cannot hold the event ({len(value)} B)")
    return value


def json_values(count: int, size: int, seed: int = 30) -> list[bytes]:
    """`count` distinct JSON-like values of `size` bytes, the same for a seed."""
    rng = random.Random(seed)
    return [json_value(rng, n, size) for n in range(count)]
