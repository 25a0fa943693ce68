import numpy as np

from ostinato import testing


def test_in_process_server_defaults():
    with testing.in_process_server() as (server, client):
        client.insert(np.zeros(2), {"table": 1.0})
        assert client.server_info()["table"].current_size == 1
    assert server.stopped


def test_prioritized_table_helper():
    with testing.in_process_server(testing.prioritized_table("p", 1.0)) as (_, client):
        client.insert(np.zeros(2), {"p": 2.0})
        assert client.sample_batch("p", 4).info.priority.tolist() == [2.0] * 4
