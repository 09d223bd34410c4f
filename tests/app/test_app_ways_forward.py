"""A dead end becomes a way forward in the app (issue 30): a model whose weights do not fit offers evaluated
changes as buttons, and one click gives a sizing with every view back."""

from __future__ import annotations

from tests.app.test_app import headline_figures, start


def test_weights_that_do_not_fit_offer_buttons_that_fix_the_sizing():
    at = start()
    at.sidebar.selectbox(key="gpu").select("l40s").run()
    at.sidebar.selectbox(key="model").select("llama-3.1-70b").run()
    assert not at.exception
    assert any("cannot be evaluated" in e.value for e in at.error)
    buttons = [b for b in at.button if b.key and b.key.startswith("way_forward_")]
    assert buttons and all(b.label.startswith("Use ") for b in buttons)
    buttons[0].click().run()
    assert not at.exception
    assert not any("cannot be evaluated" in e.value for e in at.error)
    assert headline_figures(at).get("GPUs")  # the headline is back
