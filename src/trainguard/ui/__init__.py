"""The job pages: every job with its status, a job's pods, fault-recovery history and timeline, kept up to date, and what
the policy would do for a fault, served over HTTP by the local control plane and by the operator alike.

``pages`` turns what a backend has into what the page shows; ``create`` writes the create page's job in the
dialect chosen and checks it as ``trainguard validate`` does; ``server`` serves the page and its JSON, its
updates by server-sent events, and actions (scale, chaos, create) to whoever holds the session's token; the
backends give it a ``Source``. The page itself (``static/``) is plain HTML, CSS and JavaScript modules shipped in the
package: nothing is fetched from elsewhere.
"""
