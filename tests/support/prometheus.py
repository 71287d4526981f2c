"""Scraping a /metrics endpoint over HTTP and reading its samples, as Prometheus would."""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str, timeout: float = 5.0) -> Samples | None:
    """Every sample at `url`, keyed by (name, sorted labels); None if nothing answers (or
    the server ends mid-answer: a process exiting while it was scraped). prometheus_client
    always sends a Content-Length, so an answer without one was cut short after its status
    line, and reads as an empty page though it is none."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            if response.headers.get("Content-Length") is None:
                return None
            text = response.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError, http.client.IncompleteRead):
        return None
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))
