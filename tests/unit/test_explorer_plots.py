"""The training curves of a pool page (`proofpool.explorer.plots`): each point is a row of the
`checkpoint_metrics` listing (x its version, y its figure, its value as the API's CSV writes it),
a row without the figure breaks the line, and a pool without figures has no chart."""

from __future__ import annotations

import re

import pytest
from proofpool.explorer.plots import BOTTOM, HEIGHT, LEFT, RIGHT, TOP, WIDTH, line_chart, pool_charts

from proofpool.core.ledger_listings import csv_cell


def rows_of(**figures: list[float | None]) -> list[dict]:
    count = len(next(iter(figures.values())))
    return [{"version": v + 1, **{name: values[v] for name, values in figures.items()}} for v in range(count)]


def test_each_point_is_a_row_placed_by_its_version_and_value():
    rows = rows_of(mean_reward=[0.1, 0.4, 0.25, 0.7000000000000001], loss=[0.5, 0.2, -0.1, 0.0])
    chart = line_chart(list(reversed(rows)), "mean_reward", "Mean reward", "reward")  # any order in
    assert [p.version for p in chart.points] == [1, 2, 3, 4]
    assert [p.value for p in chart.points] == [csv_cell(row["mean_reward"]) for row in rows]
    xs, ys = [p.x for p in chart.points], [p.y for p in chart.points]
    assert xs == sorted(xs) and len(set(xs)) == 4  # later versions further right
    by_value = sorted(chart.points, key=lambda p: float(p.value))
    assert [p.y for p in by_value] == sorted(ys, reverse=True)  # larger values higher up (smaller y)
    for p in chart.points:
        assert LEFT <= p.x <= WIDTH - RIGHT and TOP <= p.y <= HEIGHT - BOTTOM
    assert chart.path == " ".join(f"{'M' if i == 0 else 'L'}{p.x},{p.y}" for i, p in enumerate(chart.points))
    assert "versions 1 to 4" in chart.summary and "highest 0.7000000000000001 (version 4)" in chart.summary


def test_the_same_spacing_of_versions_gives_the_same_spacing_of_points():
    chart = line_chart(rows_of(loss=[1.0, 2.0, 3.0, 4.0, 5.0]), "loss", "Loss", "loss")
    gaps = [b.x - a.x for a, b in zip(chart.points, chart.points[1:], strict=False)]
    rises = [a.y - b.y for a, b in zip(chart.points, chart.points[1:], strict=False)]
    assert max(gaps) - min(gaps) < 0.02 and max(rises) - min(rises) < 0.02 and min(rises) > 0  # within rounding


def test_a_row_without_the_figure_breaks_the_line():
    chart = line_chart(rows_of(loss=[1.0, 2.0, None, 4.0, 5.0]), "loss", "Loss", "loss")
    assert [p.version for p in chart.points] == [1, 2, 4, 5]
    assert re.fullmatch(r"M\S+ L\S+ M\S+ L\S+", chart.path)


@pytest.mark.parametrize("values", [[0.5], [0.5, 0.5, 0.5], [0.0, 0.0], [-3.0]])
def test_one_point_or_a_flat_line_is_drawn_inside_the_plot(values):
    chart = line_chart(rows_of(loss=values), "loss", "Loss", "loss")
    assert len(chart.points) == len(values)
    for p in chart.points:
        assert LEFT <= p.x <= WIDTH - RIGHT and TOP < p.y < HEIGHT - BOTTOM
    assert chart.x_ticks and chart.y_ticks


def test_ticks_are_inside_the_plot_and_label_round_numbers():
    chart = line_chart(rows_of(loss=[0.013, 0.0271, 0.0105, 0.0199]), "loss", "Loss", "loss")
    for tick in chart.y_ticks:
        assert TOP <= tick.at <= HEIGHT - BOTTOM and len(tick.label) <= 6
    assert all(tick.label.isdigit() for tick in chart.x_ticks)


def test_a_pool_gets_a_chart_per_figure_it_has_and_none_without_figures():
    grpo = rows_of(mean_reward=[0.1, 0.2], loss=[0.3, 0.2], inner_loss=[None, None])
    assert [chart.figure for chart in pool_charts(grpo)] == ["mean_reward", "loss"]
    diloco = rows_of(inner_loss=[4.1, 3.9], mean_reward=[None, None])
    assert [chart.figure for chart in pool_charts(diloco)] == ["inner_loss"]
    pending = rows_of(mean_reward=[None, None], loss=[None, None])
    assert pool_charts(pending) == [] and pool_charts([]) == []
