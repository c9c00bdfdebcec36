"""Mutating admission webhook: sends GPU pods to the sparse scheduler and wires GPU visibility.

``patch`` computes the JSONPatch (pure), ``review`` turns AdmissionReview v1 bytes into an
AdmissionReview v1 response (pure, never raises), ``app`` is the aiohttp/TLS layer, ``cli`` the
``sparse-extender webhook`` command.
"""
