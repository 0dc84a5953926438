"""`faultlens demo`: a simulated cluster and a real torch job driven live through the whole pipeline.

``state`` holds what the live view and the report show, ``driver`` runs the simulated cluster
against the broker and obeys commands, ``trainer`` runs the real reference trainer under its
launcher, ``view`` draws the live terminal view and ``summary`` builds the final report.
"""
