// Package badinput is the catalogue of bad inputs (PRODUCT.md §6.5, issue 7):
// each test drives the real decant binary into one and checks the message
// the user sees and that nothing was lost. See catalogue_test.go.
package badinput
