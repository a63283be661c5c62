"""The explorer's markup read back the way its tests (and scripts) read it: every table cell carries
the API field (`data-col`) and raw value (`data-value`), so a page's numbers can be compared with
the API's rows without scraping text meant for people.

`parse_page` and `assert_accessible_structure` are shared by `tests/unit/test_explorer_app.py` and
`tests/integration/test_explorer_pages.py`."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class PageMarkup:
    """What a page holds, by the explorer's data attributes."""

    tables: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    """Each `<table data-table>`: its body rows as {data-col: data-value}."""
    records: dict[str, dict[str, str]] = field(default_factory=dict)
    """Each `<dl data-table>` (a one-row table): {data-col: data-value}."""
    positions: dict[str, list[str]] = field(default_factory=dict)
    """Each table's rows' `data-position` (the live feed)."""
    links: list[str] = field(default_factory=list)
    headers: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    """Each table's `<th>` attributes."""
    captions: dict[str, str] = field(default_factory=dict)
    input_ids: list[str] = field(default_factory=list)
    label_for: list[str] = field(default_factory=list)
    landmarks: list[str] = field(default_factory=list)
    h1: str = ""
    errors: list[str] = field(default_factory=list)
    """`data-error` codes of error messages."""
    attributes: dict[str, dict[str, str]] = field(default_factory=dict)
    """Attributes of elements with an id."""


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = PageMarkup()
        self._table: str | None = None
        self._record: str | None = None
        self._row: dict[str, str] | None = None
        self._in_body = False
        self._text: list[str] | None = None
        self._text_target: tuple[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if "id" in a:
            self.page.attributes[a["id"]] = a
        if tag in ("header", "nav", "main", "footer") or a.get("role") in ("search", "region"):
            self.page.landmarks.append(a.get("role", tag))
        if tag == "table" and "data-table" in a:
            self._table = a["data-table"]
            self.page.tables[self._table] = []
            self.page.positions[self._table] = []
            self.page.headers[self._table] = []
        elif tag == "dl" and "data-table" in a:
            self._record = a["data-table"]
            self.page.records[self._record] = {}
        elif tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._table and self._in_body:
            self._row = {}
            self.page.tables[self._table].append(self._row)
            if "data-position" in a:
                self.page.positions[self._table].append(a["data-position"])
        elif tag == "td" and self._row is not None and "data-col" in a:
            self._row[a["data-col"]] = a["data-value"]
        elif tag == "dd" and self._record and "data-col" in a:
            self.page.records[self._record][a["data-col"]] = a["data-value"]
        elif tag == "th" and self._table:
            self.page.headers[self._table].append(a)
        elif tag == "a" and "href" in a:
            self.page.links.append(a["href"])
        elif tag in ("input", "select", "textarea"):
            self.page.input_ids.append(a.get("id", ""))
        elif tag == "label":
            self.page.label_for.append(a.get("for", ""))
        if tag == "caption" and self._table:
            self._start_text("caption", self._table)
        elif tag == "h1":
            self._start_text("h1", "")
        if "data-error" in a:
            self.page.errors.append(a["data-error"])

    def _start_text(self, kind: str, key: str) -> None:
        self._text, self._text_target = [], (kind, key)

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if self._text is not None and self._text_target and tag == self._text_target[0]:
            kind, key = self._text_target
            text = "".join(self._text).strip()
            if kind == "caption":
                self.page.captions[key] = text
            else:
                self.page.h1 = text
            self._text = self._text_target = None
        if tag == "table":
            self._table = None
            self._in_body = False
        elif tag == "tbody":
            self._in_body = False
        elif tag == "tr":
            self._row = None
        elif tag == "dl":
            self._record = None


def parse_page(html: str) -> PageMarkup:
    parser = _Parser()
    parser.feed(html)
    parser.close()
    return parser.page


def assert_accessible_structure(page: PageMarkup) -> None:
    """Landmarks, a heading, captions and column headers on every table, a label on every control,
    and a focusable labelled region around every scrolling table."""
    assert {"header", "main", "footer", "search"} <= set(page.landmarks), page.landmarks
    assert page.h1
    for name in page.tables:
        assert page.captions.get(name), f"table {name} has no caption"
        assert page.headers[name] and all(th.get("scope") == "col" for th in page.headers[name]), name
        region = page.attributes.get(f"{name}-caption")
        assert region is not None, f"table {name}'s caption has no id for its region's label"
    assert sorted(filter(None, page.input_ids)) == sorted(set(page.input_ids) & set(page.label_for)), (
        page.input_ids,
        page.label_for,
    )


def test_the_parser_reads_cells_records_positions_and_links() -> None:
    html = """<main><h1>T</h1><table data-table="t"><caption id="t-caption">Cap</caption><thead><tr>
      <th scope="col">A</th></tr></thead><tbody><tr data-position="5-1"><td data-col="a" data-value="7">
      <a href="/x">7</a></td></tr></tbody></table><dl data-table="r"><div><dt>B</dt><dd data-col="b"
      data-value="">-</dd></div></dl><p data-error="not_found">no</p></main>"""
    page = parse_page(html)
    assert page.tables == {"t": [{"a": "7"}]}
    assert page.records == {"r": {"b": ""}}
    assert page.positions["t"] == ["5-1"]
    assert page.links == ["/x"]
    assert page.captions == {"t": "Cap"}
    assert page.h1 == "T"
    assert page.errors == ["not_found"]
