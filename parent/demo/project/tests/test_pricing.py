import pytest
from pricing import cheapest, line_total, three_for_two, with_vat


@pytest.mark.parametrize(("net", "gross"), [(10.0, 12.0), (0.35, 0.42), (0.0, 0.0)])
def test_with_vat_rounds_to_the_cent(net, gross):
    assert with_vat(net) == gross


def test_negative_quantity_is_refused():
    with pytest.raises(ValueError):
        line_total(-1, 2.0)


def test_every_third_unit_is_free():
    assert three_for_two(7, 1.0) == 5.0


def test_cheapest_breaks_ties_by_name():
    assert cheapest({"b": 1.0, "a": 1.0, "c": 2.0}) == "a"
