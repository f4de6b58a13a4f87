"""`homespec chat`: a conversation over one session (homespec.session).

    app.py        Chat: turns, commands and the live status line; repl, the read loop
    readout.py    the figures chat shows, counted from the stream's StepFigures
    store.py      where chats are saved, and reading one back for --resume
"""
