"""Domain hints as the browser shows them: the problem, what to do in plain words, and a link
to the page that does it (`replica.resume` -> the source's replicas, where Resume is)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from django.urls import reverse
from django.utils.html import format_html

from replication.errors import StreamgateError
from replication.models import Stream


def _stream(anchor: str, key: str = "path",
            tab: str = "stream-detail") -> Callable[[dict[str, Any]], str | None]:
    """The stream page (the tab named) of the stream at params[key]; the page itself checks
    who may see it."""
    def url(params: dict[str, Any]) -> str | None:
        pk = Stream.objects.filter(path=params.get(key)).values_list("pk", flat=True).first()
        return None if pk is None else reverse(tab, args=[pk]) + anchor
    return url


# action -> (the link's text, its address from the hint's params; None: no page to link)
PAGES: dict[str, tuple[str, Callable[[dict[str, Any]], str | None]]] = {
    "cluster.list": ("Clusters", lambda params: reverse("overview")),
    "stream.create": ("Create a stream", lambda params: reverse("streams") + "#create-stream"),
    "topic.list": ("The stream's topics", _stream("#partitions", tab="stream-topics")),
    "topic.create": ("The stream's topics", _stream("#create-topic", tab="stream-topics")),
    "replica.list": ("The stream's replicas", _stream("#replicas")),
    "replica.add": ("Set up a replica step by step", lambda params: reverse("setup-manual")),
    "replica.resume": ("Resume it on the source stream", _stream("#replicas")),
    "upstream.list": ("The replica's upstreams", _stream("#upstreams")),
    "job.info": ("Follow the job", lambda params: reverse("job-detail", args=[params["id"]])),
    "plan.usage": ("Your plan and usage", lambda params: reverse("usage")),
}


# A command-line option as the domain's texts name it ("-source", "-ttl"), not a word's hyphen
# ("multi-master") nor a path's ("/mapr/new-york"), nor a negative number.
FLAG = re.compile(r"(?<![\w/.:'-])-([a-z]{2,})\b")


def form_words(text: str, labels: Mapping[str, str] | None = None) -> str:
    """The text with each CLI option named as the page's field: "check -source" reads "check
    Source stream path" where the page labels it so, else "the source field"."""
    labels = labels or {}
    return FLAG.sub(lambda m: labels.get(m[1], f"the {m[1]} field"), text)


def refusal(err: StreamgateError, labels: Mapping[str, str] | None = None) -> str:
    """The error for a page: its plain text, options named as the page's fields, with a link to
    the page that does what its hint says (escaped HTML, safe to show as is)."""
    desc = form_words(err.desc, labels)
    hint = err.hint
    page = PAGES.get(hint.action) if hint is not None else None
    url = page[1](dict(hint.params)) if page is not None else None
    if url is None:
        return desc
    return format_html('{} (<a href="{}">{}</a>)', desc, url, page[0])
