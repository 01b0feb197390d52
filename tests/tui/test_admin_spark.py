"""The sparklines of ``nsq admin`` (and ``nsq stat``): scaled from zero,
nothing for no data, the maximum labelled."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import Label

from nsq.tui.widgets import Spark, SparkRow, peak, spark_lines


def test_no_data_and_zeros_draw_nothing():
    assert spark_lines([], 6) == ["      "]
    assert spark_lines([0, 0, 0], 6) == ["      "]
    assert spark_lines([], 3, height=2) == ["   ", "   "]


def test_a_steady_value_draws_a_level_line_not_spikes():
    assert spark_lines([50, 50, 50], 6) == ["██████"]
    # a small wobble stays a small wobble (min-to-max scaling drew it full height)
    assert set(spark_lines([100, 99, 100, 98], 4)[0]) == {"█"}


def test_bars_scale_from_zero_and_small_values_still_show():
    assert spark_lines([1, 2, 4, 8], 4) == ["▁▂▄█"]
    assert spark_lines([0, 1, 1000], 3) == [" ▁█"]
    assert spark_lines([1, 2, 3, 4, 8], 5, height=2) == ["    █", "▂▄▆██"]


def test_more_points_than_columns_are_summarised_fewer_stretched():
    assert spark_lines([0, 8, 0, 4], 2) == ["█▄"]
    assert spark_lines([0, 8], 4) == ["  ██"]


def test_peak_labels():
    assert [peak(v) for v in (0.0, 12.5, 1234.0, 250.4)] == ["0", "12.5", "1,234", "250"]


class _SparkApp(App[None]):
    def compose(self) -> ComposeResult:
        yield SparkRow("msg/s", id="row")


async def test_spark_row_shows_current_plot_and_maximum():
    app = _SparkApp()
    async with app.run_test(size=(40, 3)) as pilot:
        row = app.query_one("#row", SparkRow)
        row.show([], "-")
        await pilot.pause()
        spark = row.query_one(Spark)
        assert str(spark.render()).strip() == ""
        assert str(row.query_one(".peak", Label).render()) == ""
        row.show([10.0, 10.0, 20.0], "20.0")
        await pilot.pause()
        assert str(row.query_one(".label", Label).render()) == "msg/s 20.0"
        assert str(row.query_one(".peak", Label).render()) == "max 20"
        drawn = str(spark.render())
        assert set(drawn) == {"▄", "█"} and drawn.endswith("█")
