"""The tool catalogue, in the style of ScaleMCP: one tool per company × financial metric, `get_<metric>_<ticker>`.

200 synthetic companies × 25 metrics = 5,000 tools. The catalogue is fixed (it does not depend on any seed), so
tool names mean the same in every session and file. A tool's output is a deterministic function of
(metric, ticker, year, quarter): a value with two decimals taken from a SHA-256 hash, so every answer is
checkable exactly without an LLM judge. `search(keyword)` ranks tool descriptions with BM25 (`bm25s`).
"""

from __future__ import annotations

import hashlib
import random
from itertools import combinations
from dataclasses import dataclass
from functools import cached_property, lru_cache

from ...memory.retrieval import bm25s_module

__all__ = ["Metric", "Company", "Tool", "Catalogue", "catalogue", "YEARS", "QUARTERS", "SEARCH_TOP_K"]

YEARS = range(2015, 2025)
QUARTERS = range(1, 5)
SEARCH_TOP_K = 5  # tools added per keyword (MemTool: top-5)


@dataclass(frozen=True)
class Metric:
    key: str  # in tool names: get_<key>_<ticker>
    phrase: str  # in descriptions and requests
    unit: str
    low: float  # values are drawn in [low, high)
    high: float


METRICS = tuple(Metric(*m) for m in (
    ("revenue", "revenue", "USD billions", 0.5, 400),
    ("net_income", "net income", "USD billions", 0.05, 90),
    ("gross_profit", "gross profit", "USD billions", 0.2, 200),
    ("operating_income", "operating income", "USD billions", 0.1, 120),
    ("ebitda", "EBITDA", "USD billions", 0.1, 150),
    ("free_cash_flow", "free cash flow", "USD billions", 0.05, 100),
    ("total_assets", "total assets", "USD billions", 1, 900),
    ("total_debt", "total debt", "USD billions", 0.1, 300),
    ("cash", "cash and equivalents", "USD billions", 0.1, 150),
    ("capex", "capital expenditure", "USD billions", 0.05, 60),
    ("rd_expense", "research and development expense", "USD billions", 0.01, 40),
    ("dividends", "dividends paid", "USD billions", 0.01, 30),
    ("inventory", "inventory", "USD billions", 0.01, 80),
    ("eps", "earnings per share", "USD", 0.1, 25),
    ("book_value", "book value per share", "USD", 1, 150),
    ("shares", "shares outstanding", "billions", 0.05, 16),
    ("employees", "employee count", "thousands", 0.2, 600),
    ("gross_margin", "gross margin", "percent", 5, 90),
    ("operating_margin", "operating margin", "percent", 1, 60),
    ("net_margin", "net margin", "percent", 0.5, 45),
    ("roe", "return on equity", "percent", 1, 60),
    ("roa", "return on assets", "percent", 0.5, 30),
    ("current_ratio", "current ratio", "ratio", 0.3, 5),
    ("debt_to_equity", "debt to equity ratio", "ratio", 0.01, 4),
    ("pe_ratio", "price to earnings ratio", "ratio", 3, 90),
))

# Company names: a compound of a prefix and a suffix (unique per company, so a search for a company's name
# finds its tools) and a sector word.
_PREFIXES = ("North South East West Blue Silver Iron Red Pine Stone Bright Clear Golden Green Oak Maple Cedar "
             "Copper Crystal Falcon").split()
_SUFFIXES = ("wind field gate brook ridge haven crest point vale harbor forge bridge light wood spring peak "
             "lake mark star rock").split()
_SECTORS = ("Energy Foods Robotics Pharma Logistics Software Textiles Mining Telecom Motors Airlines Chemicals "
            "Semiconductors Insurance Retail Shipping Biotech Media Steel Utilities").split()
NUM_COMPANIES = 200


@dataclass(frozen=True)
class Company:
    name: str
    ticker: str


@dataclass(frozen=True)
class Tool:
    name: str
    metric: Metric
    company: Company

    @property
    def description(self) -> str:
        m, c = self.metric, self.company
        return (f"{m.phrase[0].upper() + m.phrase[1:]} of {c.name} ({c.ticker}), in {m.unit}, for a fiscal year "
                f"({YEARS[0]}-{YEARS[-1]}) or one of its quarters.")

    @property
    def schema(self) -> dict:
        return {"type": "function", "function": {
            "name": self.name, "description": self.description,
            "parameters": {"type": "object", "properties": {
                "year": {"type": "integer"},
                "quarter": {"type": "integer", "description": "1-4; omit for the whole year"},
            }, "required": ["year"]},
        }}

    def value(self, year: int, quarter: int | None = None) -> str:
        """The tool's output for a period: two decimals, a pure function of (metric, ticker, year, quarter)."""
        key = f"{self.metric.key}|{self.company.ticker}|{year}|{quarter or 0}".encode()
        fraction = int.from_bytes(hashlib.sha256(key).digest()[:8], "big") / 2**64
        return f"{self.metric.low + fraction * (self.metric.high - self.metric.low):.2f}"

    def label(self, year: int, quarter: int | None = None) -> str:
        """What a result line starts with, e.g. "BLU net income Q3 2019"."""
        return f"{self.company.ticker} {self.metric.phrase} " + (f"Q{quarter} {year}" if quarter else f"FY{year}")

    def result(self, year: int, quarter: int | None = None) -> str:
        return f"{self.label(year, quarter)}: {self.value(year, quarter)} ({self.metric.unit})"


def _companies() -> list[Company]:
    rng = random.Random("memtool-catalogue")
    compounds = rng.sample([p + s for p in _PREFIXES for s in _SUFFIXES], NUM_COMPANIES)
    companies, tickers = [], set()
    for compound in compounds:
        sector = rng.choice(_SECTORS)
        letters = (compound + sector).upper()
        ticker = next(t for t in (letters[0] + a + b for a, b in combinations(letters[1:], 2)) if t not in tickers)
        tickers.add(ticker)
        companies.append(Company(f"{compound} {sector}", ticker))
    return companies


class Catalogue:
    """All tools by name, and a BM25 index over their descriptions."""

    def __init__(self):
        self.companies = _companies()
        self.metrics = METRICS
        self.tools = {t.name: t for t in (Tool(f"get_{m.key}_{c.ticker.lower()}", m, c)
                                          for c in self.companies for m in self.metrics)}
        self.names = list(self.tools)

    def __len__(self) -> int:
        return len(self.tools)

    def __contains__(self, name: str) -> bool:
        return name in self.tools

    def __getitem__(self, name: str) -> Tool:
        return self.tools[name]

    @cached_property
    def _index(self):
        bm25s = bm25s_module()

        index = bm25s.BM25()
        index.index(bm25s.tokenize([self.tools[n].description for n in self.names], stopwords="en",
                                   show_progress=False), show_progress=False)
        return index

    def search(self, keyword: str, k: int = SEARCH_TOP_K) -> list[str]:
        """The names of the (at most) k best-matching tools for a keyword, best first; ties by catalogue order.
        Tools sharing no word with the keyword never match."""
        bm25s = bm25s_module()
        import numpy as np

        (tokens,) = bm25s.tokenize([keyword], stopwords="en", return_ids=False, show_progress=False)
        known = [t for t in tokens if t in self._index.vocab_dict]
        if not known:
            return []
        scores = self._index.get_scores(known)
        order = np.lexsort((np.arange(len(scores)), -scores))[:k]
        return [self.names[i] for i in order if scores[i] > 0]


@lru_cache(maxsize=1)
def catalogue() -> Catalogue:
    """The catalogue (built once per process; its BM25 index on first search)."""
    return Catalogue()
