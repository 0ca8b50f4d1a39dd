from cart import calc_total

ITEMS = [("pen", 5, 3), ("book", 10, 2)]

print(calc_total(ITEMS))
