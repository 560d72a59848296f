"""The user simulators behind ``ask_user`` (docs/design.md section 2, rule 4) and their question matcher.

:mod:`.keyword` holds the leak guard every reply passes and the default,
offline simulator (:class:`~.keyword.UserSimulator`), which reads a question
with the word matcher of :mod:`.matching`; :mod:`.llm` puts a user model
(``--agentperturb-user-model``) behind the same guard.  The episode loop
(:mod:`..run`) and ``agentperturb simulator-check`` (:mod:`..cli`) use them;
nothing here knows of the loop, the store or the plugin.
"""
