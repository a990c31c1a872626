"""Screens and modal dialogs of the cuco TUI."""

from .help import HelpScreen
from .modals import ConfirmModal, ForkModal, ForkRequest, NoteModal, ReasonModal
from .nodes import NodesScreen
from .review import ReviewScreen
from .runs import RunsScreen

__all__ = [
    "HelpScreen",
    "ConfirmModal",
    "ForkModal",
    "ForkRequest",
    "NoteModal",
    "ReasonModal",
    "NodesScreen",
    "ReviewScreen",
    "RunsScreen",
]
