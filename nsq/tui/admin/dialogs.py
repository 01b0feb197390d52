"""The modal dialogs of ``nsq admin``: the confirmation in front of every
action, the create form, the rewind form and the keys (help). Each is
dismissed with its answer; the screen that pushed it acts on it."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from nsq.cluster.rewind import parse_since
from nsq.protocol.names import is_valid_channel_name, is_valid_topic_name

__all__ = ["ConfirmScreen", "CreateScreen", "HelpScreen", "RewindScreen"]


class ConfirmScreen(ModalScreen[bool]):
    """"Are you sure?": dismissed with True (``y`` or the action button) or
    False (``n``, ``escape`` or Cancel, which has the focus)."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical {
        width: 64; max-width: 100%; height: auto; border: thick $error 80%; background: $surface; padding: 1 2;
    }
    ConfirmScreen #question { width: 1fr; height: auto; margin-bottom: 1; }
    ConfirmScreen Horizontal { height: auto; align-horizontal: right; }
    ConfirmScreen Button { margin-left: 2; }
    """

    def __init__(self, question: str, verb: str, destructive: bool = True) -> None:
        super().__init__()
        self.question = question
        self.verb = verb
        self.destructive = destructive

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.question, id="question", markup=False)
            with Horizontal():
                yield Button(f"{self.verb} (y)", id="yes", variant="error" if self.destructive else "primary")
                yield Button("Cancel (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class CreateScreen(ModalScreen[tuple[str, str] | None]):
    """nsqadmin's "Create Topic/Channel" form: dismissed with ``(topic,
    channel)`` (channel may be "") or None. Names are checked before."""

    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        # priority: the app moves the focus before it hands on the next key,
        # so that keys typed fast after the tab land in the next field
        Binding("tab", "app.focus_next", "Next field", show=False, priority=True),
        Binding("shift+tab", "app.focus_previous", "Previous field", show=False, priority=True),
    ]
    DEFAULT_CSS = """
    CreateScreen { align: center middle; }
    CreateScreen > Vertical {
        width: 64; max-width: 100%; height: auto; border: thick $primary; background: $surface; padding: 1 2;
    }
    CreateScreen #intro { width: 1fr; height: auto; }
    CreateScreen Input { margin-bottom: 1; }
    CreateScreen #problem { color: $error; height: auto; }
    CreateScreen Horizontal { height: auto; align-horizontal: right; }
    CreateScreen Button { margin-left: 2; }
    """

    def __init__(self, topic: str = "") -> None:
        super().__init__()
        self.topic = topic

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Create topic / channel (an empty channel creates only the topic)", id="intro",
                         markup=False)
            yield Input(self.topic, placeholder="topic", id="topic")
            yield Input(placeholder="channel (optional)", id="channel")
            yield Static("", id="problem")
            with Horizontal():
                yield Button("Create", id="create", variant="primary")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#channel" if self.topic else "#topic", Input).focus()

    def _submit(self) -> None:
        topic = self.query_one("#topic", Input).value.strip()
        channel = self.query_one("#channel", Input).value.strip()
        if not is_valid_topic_name(topic):
            self.query_one("#problem", Static).update(f"invalid topic name {topic!r}")
            return
        if channel and not is_valid_channel_name(channel):
            self.query_one("#problem", Static).update(f"invalid channel name {channel!r}")
            return
        self.dismiss((topic, channel))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._submit()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "create":
            self._submit()
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class HelpScreen(ModalScreen[None]):
    """The keys, as ``(section, [(keys, what)])``; any of escape, ``?``, ``q`` closes it."""

    BINDINGS = [Binding("escape,question_mark,q", "close", "Close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 76; max-width: 100%; height: auto; max-height: 100%; border: thick $primary; background: $surface;
        padding: 0 1;
    }
    """

    def __init__(self, title: str, sections: Sequence[tuple[str, Sequence[tuple[str, str]]]],
                 footer: str = "") -> None:
        super().__init__()
        self.title_text = title
        self.sections = sections
        self.footer_text = footer

    def compose(self) -> ComposeResult:
        table = Table(box=None, show_header=False, expand=True, padding=(0, 1))
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column(ratio=1)
        for section, keys in self.sections:
            table.add_row(Text(section, style="bold underline"), "")
            for key, what in keys:
                table.add_row(Text(key, style="bold"), what)
        with VerticalScroll():
            yield Static(Text(self.title_text, style="bold"))
            yield Static(table)
            if self.footer_text:
                yield Static(self.footer_text, markup=False)

    def action_close(self) -> None:
        self.dismiss(None)


class RewindScreen(ModalScreen[str | None]):
    """"Rewind to": a Go duration meaning that long ago (``1h``) or an RFC
    3339 time (``2026-11-25T10:00:00Z``), checked with
    :func:`nsq.cluster.rewind.parse_since`; dismissed with the text as typed
    (stripped) or None. ``window`` (what each nsqd retains) shows under the
    field."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    DEFAULT_CSS = """
    RewindScreen { align: center middle; }
    RewindScreen > Vertical {
        width: 84; max-width: 100%; height: auto; border: thick $primary; background: $surface; padding: 1 2;
    }
    RewindScreen #intro { width: 1fr; height: auto; }
    RewindScreen #window { width: 1fr; height: auto; color: $text-muted; margin-bottom: 1; }
    RewindScreen #problem { color: $error; height: auto; }
    RewindScreen Horizontal { height: auto; align-horizontal: right; }
    RewindScreen Button { margin-left: 2; }
    """

    def __init__(self, subject: str, window: str = "", value: str = "") -> None:
        super().__init__()
        self.subject = subject
        self.window = window
        self.value = value

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"Rewind {self.subject} to (a duration meaning that long ago, such as 1h or 30m, or an "
                         "RFC 3339 time): its consumers get every retained message published since then again.",
                         id="intro", markup=False)
            yield Input(self.value, placeholder="1h, 30m, 2026-11-25T10:00:00Z", id="since")
            yield Static(self.window, id="window", markup=False)
            yield Static("", id="problem", markup=False)
            with Horizontal():
                yield Button("Next", id="next", variant="primary")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#window", Static).display = bool(self.window)
        self.query_one("#since", Input).focus()

    def _submit(self) -> None:
        since = self.query_one("#since", Input).value.strip()
        try:
            parse_since(since)
        except ValueError as exc:
            self.query_one("#problem", Static).update(str(exc))
            return
        self.dismiss(since)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._submit()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "next":
            self._submit()
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)
