"""The explorer pages' HTML reader (`tests/fixtures/explorer_markup.py`) reads what the tests compare."""

from __future__ import annotations

from tests.fixtures.explorer_markup import parse_page


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
