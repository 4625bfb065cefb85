"""Support of the hostile-input tests (tests/api/test_hostile*.py) and the
mass-assignment test: the operations as the OpenAPI schema lists them
(``schema``), real rows and a valid request per operation (``world``,
``recipes``), hostile values for every kind of member (``values``), the attacks
built from them (``attacks``) and the verdict on each answer (``verdicts``)."""
