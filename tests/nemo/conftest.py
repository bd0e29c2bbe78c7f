"""The NeMo tests share the test process's cluster (tests/conftest.py: ``executor``,
``shared_executor``): none of them changes its workers."""
