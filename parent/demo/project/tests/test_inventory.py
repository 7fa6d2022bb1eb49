import pytest
from inventory import Inventory, OutOfStock


@pytest.fixture
def shelf():
    shelf = Inventory()
    shelf.add("apples", quantity=40, unit_price=0.35)
    shelf.add("pears", quantity=3, unit_price=0.50, reorder_level=10)
    return shelf


def test_add_known_item_adds_quantity(shelf):
    shelf.add("apples", quantity=10, unit_price=9.99)
    assert shelf.items["apples"].quantity == 50
    assert shelf.items["apples"].unit_price == 0.35


def test_take_more_than_stocked_raises(shelf):
    with pytest.raises(OutOfStock, match="have 3"):
        shelf.take("pears", 4)


def test_items_at_reorder_level_are_listed(shelf):
    assert [item.name for item in shelf.to_reorder()] == ["pears"]


def test_value_sums_the_shelf(shelf):
    assert shelf.value() == 15.5
