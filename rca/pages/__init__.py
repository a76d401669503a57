"""The incident pages served by `rca serve`: the list, one incident with its evidence as charts,
the accuracy figures and the feedback form, rendered on the server with Jinja2 (autoescaped:
every label, annotation, span attribute and LLM text is untrusted). They read through the API's
own search, feedback and token checks, a room above `rca.api`."""
