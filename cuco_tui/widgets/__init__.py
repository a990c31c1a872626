"""Widgets of the cuco TUI. Each shows data it is given; none calls another (the app routes messages)."""

from .candidates import CandidatesTable
from .detail import DetailTabs
from .footer import KeyFooter
from .header import RunHeader
from .islands import IslandsTable
from .scoreplot import ScorePlot

__all__ = ["CandidatesTable", "DetailTabs", "RunHeader", "IslandsTable", "KeyFooter", "ScorePlot"]
