"""A shopping cart: a list of (name, price, quantity) items."""


def calc_total(items):
    total = 0
    for _name, price, quantity in items:
        total += price * quantity
    return total
