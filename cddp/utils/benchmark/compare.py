"""torch.utils.benchmark.Compare: Measurements laid out as one table per label — a row per
(num_threads, env, sub_label or stmt), a column per description, each cell the median in
one unit for the table — with torch's layout, optional significant-figure trimming,
colouring and variance warnings."""
import collections
import enum

import numpy as np

from . import common

__all__ = ["Colorize", "Compare"]

# ANSI SGR escapes used when colouring cells (torch's values and module-level names)
_CSI = "\033["
BEST, GOOD, VERY_BAD = _CSI + "92m", _CSI + "34m", _CSI + "31m"
BAD = _CSI + "2m" + _CSI + "91m"          # dim red
BOLD, TERMINATE = _CSI + "1m", _CSI + "0m"


class Colorize(enum.Enum):
    """What a cell's median is compared with when colouring: nothing, its column's best in
    the same thread group, or its row's best."""
    NONE = "none"
    COLUMNWISE = "columnwise"
    ROWWISE = "rowwise"


def _min_or_none(values):
    """min() of an iterable, None where it is empty."""
    values = list(values)
    return min(values) if values else None


class _Column:
    """One description's cells over every thread group, sharing one number format (digits
    before and after the point)."""

    def __init__(self, grouped_results, time_scale, time_unit, trim_significant_figures,
                 highlight_warnings):
        self._grouped_results = grouped_results
        self._time_scale, self._time_unit = time_scale, time_unit
        self._trim_significant_figures = trim_significant_figures
        cells = [m for group in grouped_results for m in group]
        self._flat_results = cells
        # the " (! NN%)" suffix only takes room when some cell of this column will show it
        self._highlight_warnings = (any(m.has_warnings for m in cells if m is not None)
                                    if highlight_warnings else highlight_warnings)
        # digits before the point, in float32 as torch's tensor arithmetic does
        measured = [(m, int(np.ceil(np.log10(np.float32(m.median / time_scale)))))
                    for m in cells if m is not None]
        integer_part = max(digits for _, digits in measured)
        if trim_significant_figures:
            decimals = min(max(m.significant_figures - digits, 0) for m, digits in measured)
        else:
            decimals = 1
        width = integer_part + decimals + (1 if decimals else 0)
        suffix_width = 7 if self._highlight_warnings else 0
        self._template = "{:>%d.%df}{:>%d}" % (width, decimals, suffix_width)

    def get_results_for(self, group):
        return self._grouped_results[group]

    def num_to_str(self, value, estimated_sigfigs, spread):
        if value is None:
            # an empty cell is as wide as a filled one
            return " " * len(self.num_to_str(1, estimated_sigfigs, None))
        if self._trim_significant_figures:
            value = common.trim_sigfig(value, estimated_sigfigs)
        show_spread = self._highlight_warnings and spread is not None
        return self._template.format(value, f" (! {spread * 100:.0f}%)" if show_spread else "")


class _Row:
    """One (num_threads, env, row name) line of a Table."""

    def __init__(self, results, row_group, render_env, env_str_len, row_name_str_len,
                 time_scale, colorize, num_threads=None):
        self._results, self._row_group = results, row_group
        self._render_env, self._env_str_len = render_env, env_str_len
        self._row_name_str_len = row_name_str_len
        self._time_scale, self._colorize = time_scale, colorize
        # set only on a thread group's first row, which then carries the group's header
        self._num_threads = num_threads
        self._columns = ()

    def register_columns(self, columns):
        self._columns = columns

    def as_column_strings(self):
        first = [m for m in self._results if m is not None][0]
        env_label = f"({first.env})" if self._render_env else ""
        cells = ["  " + env_label.ljust(self._env_str_len + 4) + first.as_row_name]
        for m, column in zip(self._results, self._columns or ()):
            if m is None:
                cells.append(column.num_to_str(None, 1, None))
                continue
            spread = m.iqr / m.median if m.has_warnings else None
            cells.append(column.num_to_str(m.median / self._time_scale,
                                           m.significant_figures, spread))
        return cells

    @staticmethod
    def color_segment(segment, value, best_value):
        near_best = value <= best_value * 1.01 or value <= best_value + 100e-9
        if near_best:
            prefix = BEST + BOLD
        elif value <= best_value * 1.1:
            prefix = GOOD + BOLD
        elif value >= best_value * 5:
            prefix = VERY_BAD + BOLD
        elif value >= best_value * 2:
            prefix = BAD
        else:
            return segment
        # torch closes every coloured cell with the reset code twice
        return prefix + segment + TERMINATE + TERMINATE

    def row_separator(self, overall_width):
        if self._num_threads is None:
            return []
        return [f"{self._num_threads} threads: ".ljust(overall_width, "-")]

    def _best_values(self, n_cells):
        """What each cell's median is coloured against (-1 placeholders when not colouring)."""
        if self._colorize == Colorize.ROWWISE:
            return [min(m.median for m in self._results if m is not None)] * n_cells
        if self._colorize == Colorize.COLUMNWISE:
            return [_min_or_none(m.median for m in column.get_results_for(self._row_group)
                                 if m is not None)
                    for column in (self._columns or ())]
        return [-1] * n_cells

    def finalize_column_strings(self, column_strings, col_widths):
        best = self._best_values(len(column_strings))
        colour = self._colorize != Colorize.NONE
        out = [column_strings[0].ljust(col_widths[0])]
        for text, width, m, best_value in zip(column_strings[1:], col_widths[1:],
                                              self._results, best):
            cell = text.center(width)
            if colour and m is not None and best_value is not None:
                cell = self.color_segment(cell, m.median, best_value)
            out.append(cell)
        return out


class Table:
    """torch.utils.benchmark.utils.compare.Table: the table of one label's Measurements."""

    def __init__(self, results, colorize, trim_significant_figures, highlight_warnings):
        if len({m.label for m in results}) != 1:
            raise AssertionError("All results must share the same label")
        self.results, self.label = results, results[0].label
        self._colorize = colorize
        self._trim_significant_figures = trim_significant_figures
        self._highlight_warnings = highlight_warnings
        # one unit for the whole table, chosen by its fastest median
        self.time_unit, self.time_scale = common.select_unit(min(m.median for m in results))
        # rows by (num_threads, env); sorted() is stable, so statements keep their order
        self.row_keys = sorted(common.ordered_unique(map(self.row_fn, results)),
                               key=lambda key: (key[0], key[1] or ""))
        self.column_keys = common.ordered_unique(map(self.col_fn, results))
        self.rows, self.columns = self.populate_rows_and_columns()

    @staticmethod
    def row_fn(m):
        return m.num_threads, m.env, m.as_row_name

    @staticmethod
    def col_fn(m):
        return m.description

    def populate_rows_and_columns(self):
        row_index = {key: i for i, key in enumerate(self.row_keys)}
        col_index = {key: j for j, key in enumerate(self.column_keys)}
        grid = [[None] * len(self.column_keys) for _ in self.row_keys]
        for m in self.results:
            grid[row_index[self.row_fn(m)]][col_index[self.col_fn(m)]] = m

        envs = {m.env for m in self.results}
        show_env = len(envs) > 1
        env_width = max(len(str(env)) for env in envs) if show_env else 0
        name_width = max(len(m.as_row_name) for m in self.results)

        # rows are split into thread groups; an env label is printed where it changes
        rows, groups = [], []
        last_threads, last_env = None, ""
        for (threads, env, _), cells in zip(self.row_keys, grid):
            starts_group = not groups or threads != last_threads
            if starts_group:
                groups.append([])
                last_threads, last_env = threads, ""
            rows.append(_Row(results=cells, row_group=len(groups) - 1,
                             render_env=show_env and env != last_env,
                             env_str_len=env_width, row_name_str_len=name_width,
                             time_scale=self.time_scale, colorize=self._colorize,
                             num_threads=threads if starts_group else None))
            groups[-1].append(cells)
            last_env = env

        columns = tuple(
            _Column(grouped_results=[tuple(cells[j] for cells in group) for group in groups],
                    time_scale=self.time_scale, time_unit=self.time_unit,
                    trim_significant_figures=self._trim_significant_figures,
                    highlight_warnings=self._highlight_warnings)
            for j in range(len(self.column_keys)))
        rows = tuple(rows)
        for row in rows:
            row.register_columns(columns)
        return rows, columns

    def render(self):
        header = [""] + ["" if key is None else key for key in self.column_keys]
        grid = [header] + [row.as_column_strings() for row in self.rows]
        n_cols = max(map(len, grid))
        for cells in grid:
            cells += [""] * (n_cols - len(cells))
        widths = [max(map(len, column)) for column in zip(*grid)]
        sep = "  |  "
        body = [sep.join(text.center(w) for text, w in zip(header, widths))]
        full_width = len(body[0])
        for cells, row in zip(grid[1:], self.rows):
            body += row.row_separator(full_width)
            body.append(sep.join(row.finalize_column_strings(cells, widths)))
        title = f" {self.label or ''} ".center(full_width - 2, "-")
        unit = self.time_unit
        out = "\n".join([f"[{title}]", *body, "",
                         f"Times are in {common.unit_to_english(unit)}s ({unit})."]) + "\n"
        if self._highlight_warnings and any(m.has_warnings for m in self.results):
            out += ("(! XX%) Measurement has high variance, where XX is the IQR / median "
                    "* 100.\n")
        return out


class Compare:
    """torch.utils.benchmark.Compare(results): print() or str() gives the tables."""

    def __init__(self, results):
        self._trim_significant_figures = False
        self._colorize = Colorize.NONE
        self._highlight_warnings = False
        self._results = []
        self.extend_results(results)

    def __str__(self):
        return "\n".join(self._render())

    def extend_results(self, results):
        # checked in full before any is added (a generator is spent by the check, as in torch)
        for m in results:
            if not isinstance(m, common.Measurement):
                raise ValueError(f"Expected an instance of `Measurement`, got {type(m)} instead.")
        self._results.extend(results)

    def trim_significant_figures(self):
        self._trim_significant_figures = True

    def colorize(self, rowwise=False):
        self._colorize = Colorize.ROWWISE if rowwise else Colorize.COLUMNWISE

    def highlight_warnings(self):
        self._highlight_warnings = True

    def print(self):
        print(str(self))

    def _render(self):
        by_label = collections.OrderedDict()
        for m in common.Measurement.merge(self._results):
            by_label.setdefault(m.label, []).append(m)
        return [Table(group, self._colorize, self._trim_significant_figures,
                      self._highlight_warnings).render() for group in by_label.values()]
