from shapes import area

print(area(3, 4))
