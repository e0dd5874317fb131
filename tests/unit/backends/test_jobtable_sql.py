"""``sql.unnest_params``: a batch as a few parameters; ids and tokens as one text each."""

from __future__ import annotations

from django_blamequeue.backends.jobtable import sql


def test_ids_and_tokens_go_as_one_comma_separated_text_each() -> None:
    columns = [("a1", "b2", "c3"), ("t1", "t2", "t3"), ("done", "done", "done")]
    varying, params = sql.unnest_params(columns, joined=2)
    assert varying == (sql.JOINED, sql.JOINED, False)
    assert params == ["done", "a1,b2,c3", "t1,t2,t3"]
    ack = sql.ack_many_postgresql((*varying[:2], *[False] * (sql.ACK_COLUMNS - 2)))
    assert ack.count("string_to_array(%s::text, ',')::varchar[]") == 2


def test_a_value_with_a_comma_or_not_a_string_keeps_its_column_an_array() -> None:
    columns = [("a,1", "b2"), (None, "t2")]
    varying, params = sql.unnest_params(columns, joined=2)
    assert varying == (True, True)
    assert params == [["a,1", "b2"], [None, "t2"]]


def test_one_row_sends_its_values_as_scalars_but_the_row_count_column() -> None:
    varying, params = sql.unnest_params([("a1",), ("t1",)], joined=2)
    assert varying == (sql.JOINED, False)
    assert params == ["t1", "a1"]


def test_a_column_null_in_every_row_is_written_into_the_text_not_sent() -> None:
    columns = [("a1", "b2"), (None, None), (3, 4), ("x", "x")]
    varying, params = sql.unnest_params(columns)
    assert varying == (True, sql.NULL, True, False)
    assert params == ["x", ["a1", "b2"], [3, 4]]
    rows = sql.unnest_rows(["id", "note", "n", "kind"], ["text", "text", "int", "text"], varying)
    assert "NULL::text AS note" in rows
    assert rows.count("%s") == len(params)


def test_a_column_null_in_some_rows_only_stays_an_array() -> None:
    varying, params = sql.unnest_params([("a1", "b2"), (None, "t2")])
    assert varying == (True, True)
    assert params == [["a1", "b2"], [None, "t2"]]
