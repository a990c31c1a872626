"""Speedup over evaluations (textual-plotext): every correct candidate and the best so far."""

from __future__ import annotations

from textual_plotext import PlotextPlot


class ScorePlot(PlotextPlot):
    def show(self, points: list[tuple[int, float]]) -> None:
        plt = self.plt
        plt.clear_data()
        plt.title("speedup over evaluations")
        if points:
            xs = [p[0] for p in points]
            ys = [p[1] for p in points]
            best, running = [], 0.0
            for y in ys:
                running = max(running, y)
                best.append(running)
            plt.scatter(xs, ys, marker="dot", label="candidate")
            plt.plot(xs, best, label="best")
        self.refresh()
